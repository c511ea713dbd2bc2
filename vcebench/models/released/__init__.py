"""The authors' released formats, loaded and never trained here: guided-diffusion UNets, FastDiME's medical
UNet, DiME's classifiers / oracle (``canonical``), any ``torch.nn.Module`` (``torch_module``), and the
training schedules those formats state."""
