"""The game-neutral run: the training loop, its components and loaders, the step output, the
Game protocol, the base config and the table of games."""
