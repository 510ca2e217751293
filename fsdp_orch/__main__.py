from fsdp_orch.cli.main import main

raise SystemExit(main())
