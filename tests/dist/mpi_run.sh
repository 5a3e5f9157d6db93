#!/bin/sh
# Runs a command as 2 MPI processes on this machine over loopback TCP (the multi-node path:
# --mca btl tcp,self, no shared memory), each launch under a timeout so a hang cannot stall CI.
# Exit 77 (ctest: skipped) with the reason when mpirun is absent.
#   mpi_run.sh COMMAND ARGS...
command -v mpirun >/dev/null 2>&1 || { echo "SKIPPED: mpirun not found (scripts/install-deps.sh installs openmpi-bin)"; exit 77; }
exec timeout -k 5 "${PLUMB_MPI_TIMEOUT:-120}" mpirun -np 2 --oversubscribe --allow-run-as-root \
  --mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo "$@"
