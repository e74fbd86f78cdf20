"""taskhub.leaderboard: run directories and validation reports -> a static HTML leaderboard.

``build_site`` reads runs (``taskhub.read_results_table``) and validation reports, computes every
number with the core's statistics, and writes a site that works offline from the file system or
any static host: a models x tasksets matrix, a page per taskset, model, run (with an episode
browser) and environment, and downloads of every table and of Hugging Face model-index YAML.

Example::

    from taskhub.leaderboard import build_site

    build_site(["runs/"], "site/")
"""

from __future__ import annotations

from ._inputs import Inputs, Resolver, RunInput, hub_resolver, resolve_inputs
from ._serve import make_server
from ._site import SiteInfo, build_site

__all__ = [
    "Inputs",
    "Resolver",
    "RunInput",
    "SiteInfo",
    "build_site",
    "hub_resolver",
    "make_server",
    "resolve_inputs",
]
