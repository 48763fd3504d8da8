"""`python -m ttsfleet_runtime ...`: the same as the `ttsfleet-runtime` command."""

from ttsfleet_runtime.cli import main

raise SystemExit(main())
