from fsdp_orch.cli import main

raise SystemExit(main())
