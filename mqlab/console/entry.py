"""The ``mqlab`` console script: the command line, with a Ctrl-C during start-up handled.

Importing the command line pulls in Rich, asyncio and the plugin registry; a
Ctrl-C in that second would otherwise print a KeyboardInterrupt traceback.
"""

from __future__ import annotations

import sys


def main() -> int:
    try:
        from mqlab.console.cli import main as cli_main
    except KeyboardInterrupt:
        sys.stderr.write("mqlab: interrupted\n")
        return 130
    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
