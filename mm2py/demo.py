"""`make demo`: start the two local clusters and show what runs on them.

Until the mirror engine lands this only starts the clusters and says so plainly.
"""

from __future__ import annotations

import sys

from mm2py.kafka_local import dev


def main() -> int:
    clusters = dev.up()
    for c in clusters:
        print(f"{c.name:6} bootstrap.servers={c.bootstrap}")
    print("The mirror engine is not built yet: only the clusters run. Stop them with "
          "`mm2py dev down`.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
