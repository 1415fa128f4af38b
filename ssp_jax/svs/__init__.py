"""SvS: self-play with variational problem synthesis for math RLVR, on the SSP engine (docs/svs.md)."""
