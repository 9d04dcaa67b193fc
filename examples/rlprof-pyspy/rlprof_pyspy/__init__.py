"""rlprof-pyspy: the ``pyspy`` backend (:mod:`rlprof_pyspy.backend`)."""
