"""The example config shipped with the package: ``CONFIG`` is its path (``skyrl eval $CONFIG``)."""

from pathlib import Path

CONFIG = Path(__file__).with_name("reasoning_gym.yaml")
