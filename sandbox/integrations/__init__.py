"""Hooks that run the sandbox's methods inside RL training frameworks (``docs/promotion.md``)."""
