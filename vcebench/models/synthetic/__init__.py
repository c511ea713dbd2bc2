"""The small synthetic networks and their trainers: the classifier, the judges (oracle, face identity,
perceptual, SimSiam, FID features), their architectures, augmentations and the loader of a trained one."""
