"""Testing helpers: reference models (kiln.testing.models) for frontends and end-to-end tests.

Example:
    >>> from kiln.testing.models import resnet18, mobilenet_v2, bert   # doctest: +SKIP
"""
