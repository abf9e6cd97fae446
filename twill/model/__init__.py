"""The scheduling problem, solver-neutral: :mod:`.problem` (the inputs a solver sees), :mod:`.liveness`
(what a
schedule holds and when), :mod:`.bounds` (ResMII, RecMII, critical path). Imports only :mod:`twill.ir`."""
