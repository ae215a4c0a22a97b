"""What keeps a command from falling silent: a line on standard error whenever nothing has been written for a while.

Standard library only: it also runs as a child process of the command (`python -I -S _speaker.py COMMAND SECONDS`),
reading the command's news on its standard input and writing to the standard error it inherits. A process, not a
thread, because TensorFlow holds the GIL for tens of seconds in some calls (the LiteRT converter, restoring a
SavedModel's variables), and a thread's line would wait for them. `commands._common` starts it; where standard
error is no file descriptor (a test's capture), the same `Silence` runs in a thread instead.

The news, one per line: `step WHAT` (a step begins: a silence is reported as `WHAT ... N s`, N counted from the
step's start), `end` (the step is over: the one it was inside goes on), `said TEXT` (a line was printed: a later
silence is reported as `still working after: TEXT ... N s`), `out 1` / `out 0` (output was written that ends a line,
or leaves it open: the report then starts on a new line), `quit`.
"""

import os
import select
import sys
import time


class Silence:
    """The speaker's state: what the command is doing and when it last wrote; `due(now)` is the line to write, if any.

    Args:
        command: str, the command's name in the line (`bert-keras COMMAND: ...`).
        seconds: float, the longest silence.
        now: float, the start (a `time.monotonic()` reading; child and parent share that clock).
    """

    def __init__(self, command, seconds, now):
        self.prefix, self.seconds = f"bert-keras {command}: ", seconds
        self.steps = []  # (what, started) of the steps under way, innermost last
        self.said, self.said_at = None, now
        self.last = now
        self.open_line = False

    def news(self, line, now):
        kind, _, text = line.partition(" ")
        if kind == "step":
            self.steps.append((text, now))
            self.last = now
        elif kind == "end":
            if self.steps:
                self.steps.pop()
            self.last = now
        elif kind == "said":  # a whole line
            self.said, self.said_at = text, now
            self.last, self.open_line = now, False
        elif kind == "out":
            self.last, self.open_line = now, text == "0"

    def wait(self, now):
        """Seconds until the next line is due."""
        return max(0.0, self.last + self.seconds - now)

    def due(self, now):
        """The line to write now (with its line break), or None; writing it counts as output."""
        if now - self.last < self.seconds:
            return None
        if self.steps:
            what, started = self.steps[-1]
            line = f"{what} ... {now - started:.0f} s"
        elif self.said:
            line = f"still working after: {self.said} ... {now - self.said_at:.0f} s"
        else:
            line = f"still working ... {now - self.said_at:.0f} s"
        text = ("\n" if self.open_line else "") + self.prefix + line + "\n"
        self.last, self.open_line = now, False
        return text


def main(command, seconds):
    """The child process: news on standard input until it closes (the command ended or died), lines on standard error."""
    silence, pending = Silence(command, float(seconds), time.monotonic()), b""
    while True:
        ready, _, _ = select.select([0], [], [], silence.wait(time.monotonic()))
        if ready:
            data = os.read(0, 65536)
            if not data:
                return
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:
                if line == b"quit":  # the command is done (a process it forked may still hold the pipe open)
                    return
                silence.news(line.decode("utf-8", "replace"), time.monotonic())
        text = silence.due(time.monotonic())
        if text is not None:
            try:
                os.write(2, text.encode("utf-8", "replace"))
            except OSError:  # standard error closed: nobody to speak to
                return


if __name__ == "__main__":
    main(*sys.argv[1:3])
