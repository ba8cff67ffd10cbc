"""Untrusted work outside the event loop: a child process parses what strangers send (web pages,
PDFs, office files, pictures) under the kernel's CPU-time and memory limits and a wall-clock
deadline, so a hostile input costs one job and never stalls or bloats the daemon.

parent: the daemon's side (`Worker`: started lazily, one job at a time behind a bounded queue,
replaced after a kill or a crash, ended when idle); child: the process itself; wire: the frames
between them (no pickle: the child's answers are read as hostile). Imports only the vocabulary.
"""
