// wgmma.mma_async m64nNk16 (f32 accumulators, f16/bf16 operands from shared
// memory descriptors) and m64nNk32 (FP8 operands) spelled out for N = 64,
// 128 and 256: an accumulator
// register per operand makes the lists long, so they live here, apart from
// the wrappers in ptx_hopper.h that explain them. Operands: the N/2 accumulators,
// then desc_a, desc_b, the scale-d flag (0: D = A*B, else D = A*B + D) and the
// two transpose immediates (1: A is M-major / B is N-major). Needs sm_90a.
// Private to ptx_hopper.h.
#pragma once

#include <cstdint>

namespace mt::MT_KERNEL_NS::ptx::wgmma_asm {

// One wgmma_n<N>_<TYPE>(d, desc_a, desc_b, accumulate): REGS lists the N/2
// accumulator operands ("%0,...", without braces), D_OPERANDS their "+f"
// bindings, and A, B, S, TA, TB the operand numbers of desc_a, desc_b,
// scale-d and the two transposes, as strings.
#define MT_WGMMA(N, TYPE, COUNT, REGS, D_OPERANDS, A, B, S, TA, TB)                                                 \
  template <int TransA, int TransB>                                                                                 \
  __device__ __forceinline__ void wgmma_n##N##_##TYPE(float(&d)[COUNT], std::uint64_t desc_a, std::uint64_t desc_b, \
                                                      int accumulate) {                                             \
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %" S                                                           \
                 ", 0;\n"                                                                                           \
                 " wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #TYPE "." #TYPE " {" REGS "}, %" A ", %" B      \
                 ", p, 1, 1, %" TA ", %" TB ";\n}\n"                                                                \
                 : D_OPERANDS                                                                                       \
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TransA), "n"(TransB));                            \
  }

// The accumulator lists: each N's extends the previous one.
#define MT_WGMMA_REGS_64                                                                                               \
  "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30," \
  "%31"
#define MT_WGMMA_D_64                                                                                         \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),  \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define MT_WGMMA_REGS_128                                                                                              \
  MT_WGMMA_REGS_64                                                                                                     \
      ",%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%" \
      "59,%60,%61,%62,%63"
#define MT_WGMMA_D_128                                                                                        \
  MT_WGMMA_D_64, "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]),   \
      "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), \
      "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), \
      "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), \
      "+f"(d[63])
#define MT_WGMMA_REGS_256                                                                                              \
  MT_WGMMA_REGS_128                                                                                                    \
      ",%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%" \
      "91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114," \
      "%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
#define MT_WGMMA_D_256                                                                                                \
  MT_WGMMA_D_128, "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]),          \
      "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]),         \
      "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]),         \
      "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]),         \
      "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]),      \
      "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), \
      "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), \
      "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), \
      "+f"(d[127])
MT_WGMMA(64, f16, 32, MT_WGMMA_REGS_64, MT_WGMMA_D_64, "32", "33", "34", "35", "36")
MT_WGMMA(64, bf16, 32, MT_WGMMA_REGS_64, MT_WGMMA_D_64, "32", "33", "34", "35", "36")
MT_WGMMA(128, f16, 64, MT_WGMMA_REGS_128, MT_WGMMA_D_128, "64", "65", "66", "67", "68")
MT_WGMMA(128, bf16, 64, MT_WGMMA_REGS_128, MT_WGMMA_D_128, "64", "65", "66", "67", "68")
MT_WGMMA(256, f16, 128, MT_WGMMA_REGS_256, MT_WGMMA_D_256, "128", "129", "130", "131", "132")
MT_WGMMA(256, bf16, 128, MT_WGMMA_REGS_256, MT_WGMMA_D_256, "128", "129", "130", "131", "132")

// FP8: m64nNk32 with E4M3/E5M2 operands, both K-major (8-bit types take no
// transpose immediates). Operands: the accumulators, desc_a, desc_b, scale-d.
#define MT_WGMMA_FP8(N, ATYPE, BTYPE, COUNT, REGS, D_OPERANDS, A, B, S)                                     \
  __device__ __forceinline__ void wgmma_n##N##_##ATYPE##_##BTYPE(float(&d)[COUNT], std::uint64_t desc_a,     \
                                                                 std::uint64_t desc_b, int accumulate) {    \
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %" S                                                     \
                 ", 0;\n"                                                                                    \
                 " wgmma.mma_async.sync.aligned.m64n" #N "k32.f32." #ATYPE "." #BTYPE " {" REGS "}, %" A ", %" B \
                 ", p, 1, 1;\n}\n"                                                                           \
                 : D_OPERANDS                                                                                \
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate));                                               \
  }
MT_WGMMA_FP8(64, e4m3, e4m3, 32, MT_WGMMA_REGS_64, MT_WGMMA_D_64, "32", "33", "34")
MT_WGMMA_FP8(64, e5m2, e4m3, 32, MT_WGMMA_REGS_64, MT_WGMMA_D_64, "32", "33", "34")
MT_WGMMA_FP8(64, e4m3, e5m2, 32, MT_WGMMA_REGS_64, MT_WGMMA_D_64, "32", "33", "34")
MT_WGMMA_FP8(64, e5m2, e5m2, 32, MT_WGMMA_REGS_64, MT_WGMMA_D_64, "32", "33", "34")
MT_WGMMA_FP8(128, e4m3, e4m3, 64, MT_WGMMA_REGS_128, MT_WGMMA_D_128, "64", "65", "66")
MT_WGMMA_FP8(128, e5m2, e4m3, 64, MT_WGMMA_REGS_128, MT_WGMMA_D_128, "64", "65", "66")
MT_WGMMA_FP8(128, e4m3, e5m2, 64, MT_WGMMA_REGS_128, MT_WGMMA_D_128, "64", "65", "66")
MT_WGMMA_FP8(128, e5m2, e5m2, 64, MT_WGMMA_REGS_128, MT_WGMMA_D_128, "64", "65", "66")
MT_WGMMA_FP8(256, e4m3, e4m3, 128, MT_WGMMA_REGS_256, MT_WGMMA_D_256, "128", "129", "130")
MT_WGMMA_FP8(256, e5m2, e4m3, 128, MT_WGMMA_REGS_256, MT_WGMMA_D_256, "128", "129", "130")
MT_WGMMA_FP8(256, e4m3, e5m2, 128, MT_WGMMA_REGS_256, MT_WGMMA_D_256, "128", "129", "130")
MT_WGMMA_FP8(256, e5m2, e5m2, 128, MT_WGMMA_REGS_256, MT_WGMMA_D_256, "128", "129", "130")
#undef MT_WGMMA_FP8

#undef MT_WGMMA_REGS_64
#undef MT_WGMMA_REGS_128
#undef MT_WGMMA_REGS_256
#undef MT_WGMMA_D_64
#undef MT_WGMMA_D_128
#undef MT_WGMMA_D_256
#undef MT_WGMMA

}  // namespace mt::MT_KERNEL_NS::ptx::wgmma_asm
