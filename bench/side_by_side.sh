# Sourced by the CPU-vs-PyTorch scripts. One measurement each side is at the
# mercy of a shared machine's speed, which moves 10-30% over minutes on the
# project VM and moved one side of a single-run table but not the other.
# ROUNDS (default 3) alternates the two sides, ours then theirs, and each
# side's median is what the table compares; every round's figure is printed
# too, so the spread shows.

# The median of the numbers given.
median() {
  printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# side_by_side OURS THEIRS: runs the two commands (each prints one rate)
# ROUNDS times alternately and prints the table cells "ours | theirs |
# ratio | each round's ours / theirs".
side_by_side() {
  local ours=() theirs=() round
  for ((round = 0; round < ${ROUNDS:-3}; round++)); do
    ours+=("$(eval "$1")")
    theirs+=("$(eval "$2")")
  done
  awk -v a="$(median "${ours[@]}")" -v b="$(median "${theirs[@]}")" -v ra="${ours[*]}" -v rb="${theirs[*]}" \
    'BEGIN { printf "%.0f | %.0f | %.2fx | %s / %s", a, b, a / b, ra, rb }'
}
