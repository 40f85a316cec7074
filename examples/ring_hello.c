/* The README's example: every rank passes a token around a ring, then all meet at a
 * barrier. Run with `loomrun -n 4 build/examples/ring_hello`. */
#include <loom/loom.h>
#include <stdio.h>

#define CHECK(call)                                                                      \
  do {                                                                                   \
    loomResult_t r_ = (call);                                                            \
    if (r_ != loomSuccess) {                                                             \
      fprintf(stderr, "%s failed: %s: %s\n", #call, loomGetErrorString(r_),              \
              loomGetLastError(NULL));                                                   \
      return 1;                                                                          \
    }                                                                                    \
  } while (0)

int main(void) {
  loomComm_t comm;
  CHECK(loomCommInitFromEnv(&comm, NULL));
  int rank, size;
  CHECK(loomCommUserRank(comm, &rank));
  CHECK(loomCommCount(comm, &size));

  /* Send our rank to the right, receive the left neighbour's: a group launches both
   * together, so the ring cannot deadlock whatever order ranks call in. */
  int token = rank, received = -1;
  CHECK(loomGroupStart());
  CHECK(loomSend(&token, 1, loomInt32, (rank + 1) % size, comm, NULL));
  CHECK(loomRecv(&received, 1, loomInt32, (rank + size - 1) % size, comm, NULL));
  CHECK(loomGroupEnd());
  CHECK(loomBarrier(comm, NULL));

  printf("rank %d of %d received %d from its left neighbour\n", rank, size, received);
  CHECK(loomCommDestroy(comm));
  return received == (rank + size - 1) % size ? 0 : 1;
}
