from flud.cli import main

raise SystemExit(main())
