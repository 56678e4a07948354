"""``python -m sandbox ...``: the same command line as the ``sandbox`` script."""

from sandbox.cli import app

app(prog_name="sandbox")
