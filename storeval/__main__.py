from .interrupts import install

install()  # before the command line's imports: a stop signal from the first moment is noted, not a traceback

from .cli import main  # noqa: E402

main()
