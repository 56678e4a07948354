"""The sandbox's methods inside the trainers people run on GPUs (``docs/promotion.md``)."""
