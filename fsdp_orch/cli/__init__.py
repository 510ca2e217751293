"""The command line: argparse, the status table, event lines, doctor. Printing only."""
