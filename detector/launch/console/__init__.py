"""What the entry points put on the console and keep off it: library
logging and native noise filtered, --help, train.py's last line
(docs/architecture.md, "The console")."""
