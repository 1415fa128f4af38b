"""ssp-jax: Search Self-Play and SvS in pure JAX."""
__version__ = "0.1.0"
