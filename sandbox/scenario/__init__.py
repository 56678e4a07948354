"""Scenario files: typed, validated, overridable experiment descriptions."""

from sandbox.base.lazy_api import api_getattr

__getattr__ = api_getattr(__name__)
