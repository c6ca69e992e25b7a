from vixio.cli import main

raise SystemExit(main())
