"""What a schedule means on the machine: :mod:`.explain` (which constraint families bind II and L) and
:mod:`.simulate` (one SM, cycle by cycle)."""
