"""Keeps TensorFlow's C++ log lines off the command line's stderr; everything else passes through unchanged.

TensorFlow 2.21 logs through absl before absl's logging is initialised, so
`TF_CPP_MIN_LOG_LEVEL` no longer silences the lines it prints while it loads
and starts its devices ("oneDNN custom operations are on", "Could not find
cuda drivers", "failed call to cuInit", "oneDNN supports DT_INT64 only on
platforms with AVX-512" on a CPU that has AVX-512): they reach file
descriptor 2 from C++, under any verbosity. `NativeLogFilter` puts a pipe (a
pseudo-terminal when stderr is a terminal, so that progress lines still
update in place) in front of descriptor 2 and drops the lines in absl's
format (`I0000 00:00:1796113984.064114   23050 port.cc:153] ...`) and absl's
"All log messages before absl::InitializeLog()" notice; Python's messages,
warnings and tracebacks, and the output of child processes, pass through
as written.
"""

import os
import re
import sys
import threading

# absl's line prefix: severity and date, time, thread id, file:line] — or absl's one notice before it is initialised.
_NATIVE_LINE = re.compile(
    rb"^(?:[IWEF]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [^\s:\]]+:\d+\] "
    rb"|WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    rb"|To enable the following instructions: .*in other operations, rebuild TensorFlow with the appropriate compiler flags\.$)"
)


def is_native_log_line(line):
    """Whether a line (bytes, without its newline) is one of TensorFlow's C++ log lines."""
    return _NATIVE_LINE.match(line) is not None


class NativeLogFilter:
    """A context in which descriptor 2 drops TensorFlow's C++ log lines; on exit it is the original again.

    Example:

    ```python
    with NativeLogFilter():
        import tensorflow as tf   # its start-up lines are dropped
        print("kept", file=sys.stderr)
    ```
    """

    def __enter__(self):
        sys.stderr.flush()
        self._original = os.dup(2)
        if os.isatty(2):
            import tty

            reader, writer = os.openpty()
            tty.setraw(writer)  # bytes through unchanged (no "\n" -> "\r\n")
        else:
            reader, writer = os.pipe()
        os.dup2(writer, 2)
        os.close(writer)
        self._thread = threading.Thread(target=self._pump, args=(reader,), name="native-log-filter", daemon=True)
        self._thread.start()
        return self

    def _write(self, data):
        while data:
            try:
                data = data[os.write(self._original, data):]
            except OSError:  # the reader of stderr is gone: nothing more to show
                return

    def _pump(self, reader):
        pending = b""
        while True:
            try:
                chunk = os.read(reader, 65536)
            except OSError:  # a pseudo-terminal reports EIO once its last writer has closed
                chunk = b""
            if not chunk:
                break
            *lines, pending = (pending + chunk).split(b"\n")
            kept = [line + b"\n" for line in lines if not is_native_log_line(line)]
            # A partial line that cannot become a log line (a progress update, "\r..."): shown now, not at its end.
            if pending and (pending[:1] not in (b"I", b"W", b"E", b"F") or b"\r" in pending):
                kept.append(pending)
                pending = b""
            self._write(b"".join(kept))
        if pending and not is_native_log_line(pending):
            self._write(pending)
        os.close(reader)

    def __exit__(self, *exc_info):
        sys.stderr.flush()
        os.dup2(self._original, 2)  # closes this process's end of the pipe: the pump reads to its end
        self._thread.join(timeout=2.0)  # a child process that still holds the pipe must not hold the exit too
        os.close(self._original)
        return False
