"""The part of the sandbox that runs outside the caller: the launcher script and the modules it imports.

These files run in fresh interpreters (``python -I -S``) without rlcore on the path: :mod:`launcher` adds
this folder to ``sys.path`` and imports :mod:`kernel`, :mod:`landlock` and :mod:`mounts` by their own
names (the server imports :mod:`cgroup_folder` the same way); :mod:`program` is passed to the sandboxed
interpreter with ``-c``. None of them imports rlcore.
"""
