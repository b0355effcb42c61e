from flud.cli.main import main

raise SystemExit(main())
