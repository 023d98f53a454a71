/*
 * ackgap's power-loss shim, loaded with LD_PRELOAD into valkey-server (or
 * redis-server) when a run asks for `power-loss` (src/server/powercut.rs).
 *
 * A kill -9 keeps the page cache: every byte the server wrote survives it,
 * synced or not. A power loss keeps only what reached the disk. This shim
 * remembers, for every regular file under the data directory, its length at
 * its last successful fsync/fdatasync, and on the cut signal truncates each
 * file to that length and _exit()s: what is left is what a power loss at that
 * instant would have left of files that only grow (the AOF, its manifest, an
 * RDB written to a temporary file and renamed).
 *
 * Environment (read once, at load; without ACKGAP_POWERCUT_DIR the shim only
 * passes calls through):
 *   ACKGAP_POWERCUT_DIR    the data directory
 *   ACKGAP_POWERCUT_SPARE  a file name at its top to leave alone (the log)
 *
 * How a length is known:
 *   - Files are keyed by (device, inode), so a rename (the manifest's
 *     temporary file, a rewritten base, dump.rdb) carries the length along
 *     with no path bookkeeping.
 *   - At load every file already there counts as synced at its length (the
 *     previous life's page cache was kept, or cut already).
 *   - fsync/fdatasync: the length is read with fstat *before* the call and
 *     recorded once it succeeds: a byte another thread appends while the
 *     call runs is not counted as synced.
 *   - unlink(at) and a rename over a file forget its inode (when that was its
 *     last link), so a reused inode number never inherits a stale length.
 *   - A file created in this life and never synced is cut to 0 bytes (kept,
 *     not removed: its directory entry was made durable by the directory
 *     fsync that follows a manifest or RDB rename).
 * The table lives in a MAP_SHARED anonymous mapping made at load, so the fork
 * children that write a rewritten AOF base or a BGSAVE's RDB record their
 * fsyncs where the server's main process reads them.
 *
 * The cut runs on the server's main thread, the one that writes the AOF, so no
 * AOF write can land while it truncates (another thread that receives the
 * signal forwards it there with tgkill). The handler uses only system calls.
 * It writes one line to stderr (the server's log):
 *   ackgap-powercut: cut N files, dropped B bytes
 * and exits with status 86, or 87 when the table overflowed (nothing is cut:
 * a cut that could not know a length would invent a loss) or 88 when a file
 * could not be truncated.
 *
 * Not modelled: overwrites in place of synced bytes (Valkey only appends or
 * writes a new file and renames it), O_SYNC/O_DSYNC opens (Valkey opens none),
 * sync_file_range (not a durability guarantee; an RDB is fsynced whole before
 * its rename anyway), and unsynced deletions or renames coming back.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The cut signal is SIGRTMIN + ACKGAP_POWERCUT_RT (41 with glibc): Valkey
 * handles SIGTERM, SIGINT, SIGUSR1 (its children), SIGALRM (the watchdog)
 * and the crash signals, and no real-time signal. powercut.rs sends the
 * same number. */
#define ACKGAP_POWERCUT_RT 7
#define EXIT_CUT 86
#define EXIT_OVERFLOW 87
#define EXIT_FAILED 88
#define SLOTS 8192

enum { EMPTY = 0, BUSY = 1, READY = 2, DEAD = 3 };

struct slot {
    _Atomic int state;
    uint64_t dev;
    uint64_t ino;
    _Atomic int64_t synced;
};

struct table {
    _Atomic int overflow;
    struct slot slots[SLOTS];
};

static struct table *table;
static int active;
static dev_t dir_dev;
static char dir[4096];
static char spare[256];

static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_rename)(const char *, const char *);
static int (*real_renameat)(int, const char *, int, const char *);
static int (*real_renameat2)(int, const char *, int, const char *, unsigned int);
static int (*real_unlink)(const char *);
static int (*real_unlinkat)(int, const char *, int);

#define REAL(name)                                                             \
    do {                                                                       \
        if (!real_##name) *(void **)&real_##name = dlsym(RTLD_NEXT, #name);    \
    } while (0)

static size_t home(uint64_t dev, uint64_t ino) {
    return (size_t)((ino * 0x9E3779B97F4A7C15ull) ^ dev) % SLOTS;
}

/* The synced length recorded for (dev, ino), or -1 if none. */
static int64_t lookup(uint64_t dev, uint64_t ino) {
    size_t start = home(dev, ino);
    for (size_t i = 0; i < SLOTS; i++) {
        struct slot *s = &table->slots[(start + i) % SLOTS];
        int state = atomic_load(&s->state);
        if (state == EMPTY) return -1;
        if (state == READY && s->dev == dev && s->ino == ino) return atomic_load(&s->synced);
    }
    return -1;
}

static void record(uint64_t dev, uint64_t ino, int64_t synced) {
    size_t start = home(dev, ino);
    for (size_t i = 0; i < SLOTS; i++) {
        struct slot *s = &table->slots[(start + i) % SLOTS];
        int state = atomic_load(&s->state);
        if (state == EMPTY) break;
        if (state == READY && s->dev == dev && s->ino == ino) {
            atomic_store(&s->synced, synced);
            return;
        }
    }
    for (size_t i = 0; i < SLOTS; i++) {
        struct slot *s = &table->slots[(start + i) % SLOTS];
        int expected = atomic_load(&s->state);
        if (expected != EMPTY && expected != DEAD) continue;
        if (!atomic_compare_exchange_strong(&s->state, &expected, BUSY)) continue;
        s->dev = dev;
        s->ino = ino;
        atomic_store(&s->synced, synced);
        atomic_store(&s->state, READY);
        return;
    }
    atomic_store(&table->overflow, 1);
}

static void forget(uint64_t dev, uint64_t ino) {
    size_t start = home(dev, ino);
    for (size_t i = 0; i < SLOTS; i++) {
        struct slot *s = &table->slots[(start + i) % SLOTS];
        int state = atomic_load(&s->state);
        if (state == EMPTY) return;
        if (state == READY && s->dev == dev && s->ino == ino) {
            atomic_compare_exchange_strong(&s->state, &state, DEAD);
        }
    }
}

/* ---- the wrapped calls ---------------------------------------------------- */

static int synced_call(int (*call)(int), int fd) {
    struct stat st;
    int known = active && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_dev == dir_dev;
    int rc = call(fd);
    if (rc == 0 && known) record(st.st_dev, st.st_ino, st.st_size);
    return rc;
}

int fsync(int fd) {
    REAL(fsync);
    return synced_call(real_fsync, fd);
}

int fdatasync(int fd) {
    REAL(fdatasync);
    return synced_call(real_fdatasync, fd);
}

/* Whether (dirfd, path) names a regular file of the data directory's device
 * with this as its last link: its inode is freed when the call succeeds. */
static int last_link(int dirfd, const char *path, struct stat *st) {
    return active && fstatat(dirfd, path, st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st->st_mode) &&
           st->st_dev == dir_dev && st->st_nlink == 1;
}

int unlinkat(int dirfd, const char *path, int flags) {
    REAL(unlinkat);
    struct stat st;
    int gone = !(flags & AT_REMOVEDIR) && last_link(dirfd, path, &st);
    int rc = real_unlinkat(dirfd, path, flags);
    if (rc == 0 && gone) forget(st.st_dev, st.st_ino);
    return rc;
}

int unlink(const char *path) {
    REAL(unlink);
    struct stat st;
    int gone = last_link(AT_FDCWD, path, &st);
    int rc = real_unlink(path);
    if (rc == 0 && gone) forget(st.st_dev, st.st_ino);
    return rc;
}

/* A rename over a file frees the target's inode (unless both name one). */
static int replaced(int olddirfd, const char *old, int newdirfd, const char *new, struct stat *st) {
    struct stat from;
    return last_link(newdirfd, new, st) &&
           !(fstatat(olddirfd, old, &from, AT_SYMLINK_NOFOLLOW) == 0 && from.st_ino == st->st_ino &&
             from.st_dev == st->st_dev);
}

int renameat2(int olddirfd, const char *old, int newdirfd, const char *new, unsigned int flags) {
    REAL(renameat2);
    struct stat st;
    int gone = replaced(olddirfd, old, newdirfd, new, &st);
    int rc = real_renameat2(olddirfd, old, newdirfd, new, flags);
    if (rc == 0 && gone && !(flags & RENAME_EXCHANGE)) forget(st.st_dev, st.st_ino);
    return rc;
}

int renameat(int olddirfd, const char *old, int newdirfd, const char *new) {
    REAL(renameat);
    struct stat st;
    int gone = replaced(olddirfd, old, newdirfd, new, &st);
    int rc = real_renameat(olddirfd, old, newdirfd, new);
    if (rc == 0 && gone) forget(st.st_dev, st.st_ino);
    return rc;
}

int rename(const char *old, const char *new) {
    REAL(rename);
    struct stat st;
    int gone = replaced(AT_FDCWD, old, AT_FDCWD, new, &st);
    int rc = real_rename(old, new);
    if (rc == 0 && gone) forget(st.st_dev, st.st_ino);
    return rc;
}

/* ---- walking the data directory (system calls only: it runs in the cut's
 * signal handler too) --------------------------------------------------------- */

struct linux_dirent64 {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

struct cut {
    int files;
    int failed;
    int64_t dropped;
};

/* Visits every regular file under dirfd (3 levels deep at most: Valkey uses
 * one, appendonlydir). With `out` null it records each file's length as
 * synced (at load); otherwise it cuts each to its synced length. */
static void walk(int dirfd, int depth, struct cut *out) {
    char buf[4096];
    for (;;) {
        long n = syscall(SYS_getdents64, dirfd, buf, sizeof buf);
        if (n <= 0) return;
        for (long at = 0; at < n;) {
            struct linux_dirent64 *d = (struct linux_dirent64 *)(buf + at);
            at += d->d_reclen;
            const char *name = d->d_name;
            if (name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0))) continue;
            if (depth == 0 && spare[0] && strcmp(name, spare) == 0) continue;
            struct stat st;
            if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
            if (S_ISDIR(st.st_mode)) {
                if (depth >= 3) continue;
                int sub = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (sub < 0) continue;
                walk(sub, depth + 1, out);
                close(sub);
                continue;
            }
            if (!S_ISREG(st.st_mode)) continue;
            if (!out) {
                record(st.st_dev, st.st_ino, st.st_size);
                continue;
            }
            int64_t synced = lookup(st.st_dev, st.st_ino);
            if (synced < 0) synced = 0;
            if (st.st_size <= synced) continue;
            int fd = openat(dirfd, name, O_WRONLY | O_CLOEXEC);
            if (fd < 0 || ftruncate(fd, synced) != 0) {
                out->failed++;
            } else {
                out->files++;
                out->dropped += st.st_size - synced;
            }
            if (fd >= 0) close(fd);
        }
    }
}

static char *put(char *p, const char *s) {
    while (*s) *p++ = *s++;
    return p;
}

static char *put_num(char *p, int64_t v) {
    char digits[24];
    int n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    while (n > 0) *p++ = digits[--n];
    return p;
}

static void on_cut(int sig) {
    pid_t pid = getpid();
    if ((pid_t)syscall(SYS_gettid) != pid) {
        /* Only the main thread writes the AOF: cut there, where no write can
         * run meanwhile. */
        syscall(SYS_tgkill, pid, pid, sig);
        return;
    }
    char line[160];
    char *p = line;
    if (atomic_load(&table->overflow)) {
        p = put(p, "ackgap-powercut: the length table overflowed; nothing cut\n");
        (void)!write(2, line, (size_t)(p - line));
        _exit(EXIT_OVERFLOW);
    }
    struct cut out = {0, 0, 0};
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd >= 0) walk(dirfd, 0, &out);
    p = put(p, "ackgap-powercut: cut ");
    p = put_num(p, out.files);
    p = put(p, " files, dropped ");
    p = put_num(p, out.dropped);
    p = put(p, " bytes");
    if (dirfd < 0 || out.failed) {
        p = put(p, "; FAILED on ");
        p = put_num(p, dirfd < 0 ? 1 : out.failed);
        p = put(p, dirfd < 0 ? " (the data directory)" : " files");
    }
    p = put(p, "\n");
    (void)!write(2, line, (size_t)(p - line));
    _exit(dirfd < 0 || out.failed ? EXIT_FAILED : EXIT_CUT);
}

__attribute__((constructor)) static void load(void) {
    REAL(fsync);
    REAL(fdatasync);
    REAL(rename);
    REAL(renameat);
    REAL(renameat2);
    REAL(unlink);
    REAL(unlinkat);
    const char *d = getenv("ACKGAP_POWERCUT_DIR");
    if (!d || !*d || strlen(d) >= sizeof dir) return;
    const char *s = getenv("ACKGAP_POWERCUT_SPARE");
    if (s && strlen(s) < sizeof spare) strcpy(spare, s);
    strcpy(dir, d);
    struct stat st;
    if (stat(dir, &st) != 0) return;
    dir_dev = st.st_dev;
    void *m = mmap(NULL, sizeof(struct table), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return;
    table = m;
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) return;
    walk(dirfd, 0, NULL);
    close(dirfd);
    struct sigaction act;
    memset(&act, 0, sizeof act);
    act.sa_handler = on_cut;
    sigfillset(&act.sa_mask);
    sigaction(SIGRTMIN + ACKGAP_POWERCUT_RT, &act, NULL);
    active = 1;
}
