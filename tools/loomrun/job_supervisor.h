// Running this node's ranks to the end.
#pragma once

#include "job_environment.h"
#include "options.h"

namespace loom::loomrun {

// Starts every local rank and waits until all have exited, then returns loomrun's exit
// status:
//   0        every rank exited 0
//   S        the first rank to fail exited with S (128 + N if killed by signal N); the
//            others were sent SIGTERM, then SIGKILL 3 s later
//   124      --timeout expired; the ranks were stopped the same way
//   127      the program could not be started
//   128 + N  loomrun received signal N (SIGINT, SIGTERM, SIGHUP), passed it on, and every
//            rank then exited 0
//   1        loomrun's own machinery failed (signalfd, poll)
// Blocks the signals it handles for the rest of the process's life.
int runJob(const LaunchOptions& options, const JobEnvironment& job);

}  // namespace loom::loomrun
