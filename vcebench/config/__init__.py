"""Configuration: load, check and merge the config files (``load``), tasks and method settings by task
(``tasks``), the CPU kernels pinned from the config (``kernels``)."""
