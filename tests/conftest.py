import sys
from pathlib import Path

# The program imports `components` from the repository root, as the Pulumi CLI runs it there.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
