"""Test fixtures shipped with the package: tiny random checkpoints with real tokenizers."""
