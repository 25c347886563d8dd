# lib.sh - helpers the benchmark scripts share (sourced).

# median of the numbers on stdin, one per line
median() { LC_ALL=C sort -g | awk '{v[NR]=$1} END {if (NR==0) exit 1; if (NR%2) print v[(NR+1)/2]; else printf "%.6f\n", (v[NR/2]+v[NR/2+1])/2}'; }
