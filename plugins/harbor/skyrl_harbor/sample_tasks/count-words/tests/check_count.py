"""Exit 0 when /app/count.txt holds the number of words in the original text."""
import sys
from pathlib import Path

EXPECTED = 15  # the words of environment/data/words.txt as shipped (the agent's copy may have been edited)
try:
    sys.exit(0 if int(Path("/app/count.txt").read_text().strip()) == EXPECTED else 1)
except (OSError, ValueError):
    sys.exit(1)
