// The tape and the backward engine.
#include <catch2/catch.hpp>

#include "mixtape.h"

using namespace mt;

TEST_CASE("backward accumulates into leaves through a shared subexpression", "[autograd]") {
  Tensor x = from_vector(std::vector<double>{1.0, 2.0, 3.0}, {3}, kF64).requires_grad_();
  Tensor y = mul(x, x);                // x^2
  Tensor z = sum(add(y, mul(y, x)));   // sum(x^2 + x^3)
  z.backward();
  const auto g = x.grad().to_vector();  // 2x + 3x^2
  CHECK(g[0] == Approx(5.0));
  CHECK(g[1] == Approx(16.0));
  CHECK(g[2] == Approx(33.0));
  sum(x).backward();  // a second graph accumulates into the same .grad
  CHECK(x.grad().to_vector()[0] == Approx(6.0));
}
