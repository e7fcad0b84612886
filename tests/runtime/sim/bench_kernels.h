#pragma once
namespace mt::sim::bench {
// Every thread of every block passes `barriers` __syncthreads() in a loop.
void barrier_loop(int blocks, int threads, int barriers);
}  // namespace mt::sim::bench
