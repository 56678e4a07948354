"""Teaching demos: one command, a plain-language explanation, one figure, under a minute.

``sandbox demo`` lists them; ``sandbox demo NAME`` runs one. Each demo is a single readable module
with a ``Config`` dataclass and ``main(cfg) -> Path`` (the figure); ``examples/demo_NAME.py`` is a
symbolic link to it, so it can be read and run as a standalone script (``--tiny``, ``--out DIR``
and every scalar ``Config`` field are command-line options).
"""

from sandbox.base.lazy_api import api_getattr

__getattr__ = api_getattr(__name__)
