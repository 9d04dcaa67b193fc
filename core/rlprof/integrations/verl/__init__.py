"""rlprof inside verl: the classes and the switch behind the :mod:`rlprof.verl` face."""
