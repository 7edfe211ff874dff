"""The commands: train, eval, export and predict, each a function of its Hydra config."""
