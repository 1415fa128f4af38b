"""The Search Self-Play game: prompts, rule filters, RAG verification, rewards, replay buffer,
one training step (`game.py`) and the training loop (`trainer.py`)."""
