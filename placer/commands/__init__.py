"""One module per ``placer`` subcommand: ``add_arguments(parser)`` and ``run(args) -> int``."""
