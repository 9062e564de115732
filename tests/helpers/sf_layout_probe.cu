// Prints CUTLASS's SM100 block-scaled scale-factor offsets (Sm1xxBlockScaledConfig<32>, the layout the
// tensor cores read) for an M x K operand: one line "m kb offset" per scale, for tests/test_sm100_layout.py.
#include <cstdio>
#include <cstdlib>
#include <cutlass/detail/sm100_blockscaled_layout.hpp>

int main(int argc, char** argv) {
  const int M = atoi(argv[1]), K = atoi(argv[2]);
  using Config = cutlass::detail::Sm1xxBlockScaledConfig<32>;
  const auto sfa = Config::tile_atom_to_shape_SFA(cute::make_shape(M, 1, K, 1));
  const auto sfb = Config::tile_atom_to_shape_SFB(cute::make_shape(1, M, K, 1));
  printf("size %d %d\n", int(cute::cosize(sfa)), int(cute::cosize(sfb)));
  for (int m = 0; m < M; ++m)
    for (int kb = 0; kb < K / 32; ++kb) printf("%d %d %d %d\n", m, kb, int(sfa(m, kb * 32, 0)), int(sfb(m, kb * 32, 0)));
  return 0;
}
