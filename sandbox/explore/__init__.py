"""``sandbox explore``: an interactive, self-contained HTML page of precomputed staleness runs.

:mod:`.grid` says which runs (and refuses a grid over its time budget), :mod:`.data` runs them and
reduces each to the arrays the page draws, :mod:`.page` writes the page (:mod:`.texts` holds its
words, ``explorer.js`` its drawing code).
"""

from sandbox.base.lazy_api import api_getattr

__getattr__ = api_getattr(__name__)
