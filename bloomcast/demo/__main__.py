"""``python -m bloomcast.demo``: the demo without the ``bloomcast`` console script."""

from __future__ import annotations

import argparse
import sys

from bloomcast.demo import configure, run


def main() -> int:
    parser = argparse.ArgumentParser(prog="bloomcast demo")
    configure(parser)
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
