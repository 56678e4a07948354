"""``sandbox preflight``: bounded simulations around an imported GPU config, one answer per question."""
