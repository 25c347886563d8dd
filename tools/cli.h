/*
 * cli.h - what every merak command-line tool does alike: one line of error
 * on stderr naming the tool, exit status 2 for usage errors and 1 for the
 * rest, and numbers from flags checked whole and in range.
 */
#ifndef MERAK_CLI_H
#define MERAK_CLI_H

#include "merak/merak.h"

#define EXIT_USAGE 2

/* The tool's name in messages; main sets it first. */
extern const char *cli_prog;
/* A tool starts: its name for messages; a file over the size limit
 * (ulimit -f) becomes a failed write (EFBIG), reported, instead of
 * SIGXFSZ killing the process and leaving its temporaries. */
void cli_start(const char *prog);
/* What the tool printed reached stdout (a full disk, a closed pipe: one
 * line and exit status 1). */
void cli_stdout_done(void);

/* "PROG: message (see --help)", exit 2.  Under mpirun or srun only the
 * first rank prints (every rank finds the same mistake). */
_Noreturn void cli_die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "PROG: message", exit 1. */
_Noreturn void cli_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A whole integer, or a finite number, in [lo, hi]; anything else is a
 * usage error naming the flag. */
long cli_parse_int(const char *flag, const char *s, long lo, long hi);
double cli_parse_double(const char *flag, const char *s, double lo, double hi);
/* The same with either end open (lo_open: v > lo; hi_open: v < hi), the
 * range printed as it is: "(0, 1]". */
double cli_parse_double_in(const char *flag, const char *s, double lo, int lo_open, double hi, int hi_open);
/* ... kept as a float: a number below the smallest float (it would become
 * 0) or one whose float leaves the range (0.9999999999 becoming 1) is
 * refused too. */
float cli_parse_float_in(const char *flag, const char *s, double lo, int lo_open, double hi, int hi_open);
float cli_parse_float(const char *flag, const char *s, double lo, double hi);

/* A size in bytes, above 0: a whole number, alone (bytes) or with a unit
 * as Hugging Face writes max_shard_size: B, KB, MB, GB, TB (powers of
 * 1000, as transformers counts "5GB") or KiB, MiB, GiB, TiB (powers of
 * 1024); anything else, 0 or past 2^62 bytes is a usage error naming the
 * flag. */
int64_t cli_parse_size(const char *flag, const char *s);

/* The files a weights save writes, in merak_weights_each_output's order:
 * how many, the first, the one before the last (a sharded save's last
 * shard) and the last (its index). */
typedef struct cli_saved {
    int n;
    char first[4096], shard[4096], last[4096];
} cli_saved;
void cli_saved_note(cli_saved *s, const char *file);
/* What s holds, for a message: the one file, or "INDEX, the index of N
 * shards (FIRST to LAST)".  buf, filled. */
const char *cli_saved_say(const cli_saved *s, char *buf, size_t len);

/* The default of --threads: the cores this process may run on (its CPU
 * affinity, which the Slurm plugin, mpirun --bind-to or taskset set), so
 * ranks bound to their own cores do not each start a thread per core of
 * the node; all online cores when the affinity cannot be read. */
int cli_default_threads(void);

/* The model --model names (a preset or a config.json), checked: an unknown
 * preset is a usage error, a bad file exits 1, each with one line. */
void cli_model(const char *name, merak_model_config *cfg);

#endif /* MERAK_CLI_H */
