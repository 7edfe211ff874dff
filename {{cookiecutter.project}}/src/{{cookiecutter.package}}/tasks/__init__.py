"""The commands: train, eval, export, predict and serve, each a function of its Hydra config."""
