/* Power-loss simulation for tests/faults/test_power_loss.py: an LD_PRELOAD shim that keeps, for
 * every regular file under $POWERLOSS_DIR, an image of what the file holds ON DISK, i.e. what a
 * power cut would leave: the content of every byte range at the last fsync / fdatasync / msync /
 * syncfs / sync / O_DSYNC write that covered it. Test code, never loaded by a production process.
 *
 * Layout-independent: it knows nothing of LMDB or of Leveret's files; it watches system calls.
 *
 *   $POWERLOSS_DIR     the directory to watch (absolute, no trailing slash); unset: pass through
 *   $POWERLOSS_SHADOW  where the images live, outside POWERLOSS_DIR; per file KEY =
 *                      "<dev>_<ino>_<birth sec>.<nsec>" (statx: a new file on a reused inode gets
 *                      a new key):
 *                        KEY.img    the synced image (same size as the file at its last sync)
 *                        KEY.log    ranges written since (u64 offset, u64 length), appended by
 *                                   every process after each write that returned
 *                        KEY.cur    how many bytes of KEY.log a sync has already copied
 *                        KEY.path   the file's path (for the restore and for people)
 *                        KEY.mapped a writable MAP_SHARED mapping exists: a sync copies the
 *                                   whole file (writes through memory leave no log record)
 *                      events.log   one line per sync call seen ("pid call key")
 *   $POWERLOSS_LIE=1   a disk that lies: every sync call returns success and makes nothing
 *                      durable (the images never change). Used to show the test catches a
 *                      store that confirms what it has not synced.
 *
 * A sync of a file takes an flock on KEY.log (all processes), reads the log records since the
 * cursor, copies those ranges from the file as it is now into KEY.img, sets KEY.img's size to
 * the file's and advances the cursor. The copy is made after the real call returned 0 (an error
 * leaves the image alone); a write racing with the sync may land in the image or not, as on a
 * real disk. An O_DSYNC/O_SYNC write copies its own range only. sync_file_range is NOT a sync
 * (it flushes neither metadata nor the disk's cache: man 2 sync_file_range); nor is
 * msync(MS_ASYNC).
 *
 * Not modelled: directory entries (a created, renamed or deleted file is taken as it is at the
 * crash; a file never synced is dropped whole), fallocate/copy_file_range/sendfile writes,
 * O_DSYNC set later with fcntl(F_SETFL), io_uring and AIO.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_FDS 65536
#define KEY_LEN 96

enum { FD_UNKNOWN = 0, FD_IGNORED = 1, FD_WATCHED = 2 };

struct fdinfo {
    int state;             /* FD_* */
    dev_t dev;             /* what the fd was when classified: an fd closed behind our back */
    ino_t ino;             /*   (fclose, close_range) and reused is classified again */
    int dsync;             /* opened with O_DSYNC or O_SYNC: every write is durable */
    char key[KEY_LEN];     /* the file's key */
};

struct mapping {
    char *addr;
    size_t len;
    off_t off;             /* file offset of addr */
    char key[KEY_LEN];
    char path[PATH_MAX];
    struct mapping *next;
};

static struct fdinfo fds[MAX_FDS];
static struct mapping *maps;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char watch_dir[PATH_MAX];   /* "" when disabled */
static size_t watch_len;
static char shadow_dir[PATH_MAX];
static int lie;

static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev64)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev2)(int, const struct iovec *, int, off_t, int);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_syncfs)(int);
static void (*real_sync)(void);
static int (*real_msync)(void *, size_t, int);
static int (*real_close)(int);
static int (*real_dup2)(int, int);
static int (*real_dup3)(int, int, int);
static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static void *(*real_mmap64)(void *, size_t, int, int, int, off_t);
static int (*real_munmap)(void *, size_t);

#define RESOLVE(name) do { if (!real_##name) real_##name = dlsym(RTLD_NEXT, #name); } while (0)

static void child_after_fork(void) { pthread_mutex_init(&mu, NULL); }

__attribute__((constructor)) static void init(void) {
    const char *w = getenv("POWERLOSS_DIR"), *s = getenv("POWERLOSS_SHADOW"), *l = getenv("POWERLOSS_LIE");
    RESOLVE(write); RESOLVE(pwrite); RESOLVE(pwrite64); RESOLVE(writev); RESOLVE(pwritev);
    RESOLVE(pwritev64); RESOLVE(pwritev2); RESOLVE(fsync); RESOLVE(fdatasync); RESOLVE(syncfs);
    RESOLVE(sync); RESOLVE(msync); RESOLVE(close); RESOLVE(dup2); RESOLVE(dup3); RESOLVE(mmap);
    RESOLVE(mmap64); RESOLVE(munmap);
    pthread_atfork(NULL, NULL, child_after_fork);
    if (w && s && *w && *s && strlen(w) < PATH_MAX - 2 && strlen(s) < PATH_MAX - KEY_LEN - 16) {
        strcpy(watch_dir, w);
        watch_len = strlen(w);
        strcpy(shadow_dir, s);
        lie = l && *l == '1';
    }
}

/* "dev_ino_btime" of an open file; 0 on success */
static int key_of_fd(int fd, char *key) {
    struct statx sx;
    if (statx(fd, "", AT_EMPTY_PATH, STATX_INO | STATX_BTIME, &sx) != 0)
        return -1;
    long long bs = (sx.stx_mask & STATX_BTIME) ? (long long)sx.stx_btime.tv_sec : 0;
    unsigned bn = (sx.stx_mask & STATX_BTIME) ? sx.stx_btime.tv_nsec : 0;
    snprintf(key, KEY_LEN, "%x.%x_%llu_%lld.%09u", sx.stx_dev_major, sx.stx_dev_minor,
             (unsigned long long)sx.stx_ino, bs, bn);
    return 0;
}

/* exported for the test's restore step (ctypes): the key of a path */
int powerloss_key(const char *path, char *out, size_t n) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    char key[KEY_LEN];
    if (fd < 0)
        return -1;
    int rc = key_of_fd(fd, key);
    real_close ? real_close(fd) : close(fd);
    if (rc == 0)
        snprintf(out, n, "%s", key);
    return rc;
}

static void shadow_path(char *out, const char *key, const char *ext) {
    snprintf(out, PATH_MAX, "%s/%s.%s", shadow_dir, key, ext);
}

static void write_all(int fd, const char *buf, size_t n) {
    while (n > 0) {
        ssize_t w = real_write(fd, buf, n);
        if (w <= 0)
            return;
        buf += w;
        n -= (size_t)w;
    }
}

static void put_text(const char *key, const char *ext, const char *text) {
    char p[PATH_MAX];
    shadow_path(p, key, ext);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0) {
        write_all(fd, text, strlen(text));
        real_close(fd);
    }
}

static void event(const char *call, const char *key) {
    char p[PATH_MAX], line[256];
    snprintf(p, sizeof p, "%s/events.log", shadow_dir);
    int fd = open(p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0)
        return;
    int n = snprintf(line, sizeof line, "%d %s %s\n", (int)getpid(), call, key);
    write_all(fd, line, (size_t)n);
    real_close(fd);
}

/* the fd's entry, classified on first use; NULL if not a watched regular file */
static struct fdinfo *watched(int fd) {
    if (!watch_len || fd < 0 || fd >= MAX_FDS)
        return NULL;
    struct fdinfo *f = &fds[fd];
    struct stat st;
    if (fstat(fd, &st) != 0)
        return NULL;
    if (__atomic_load_n(&f->state, __ATOMIC_ACQUIRE) == FD_UNKNOWN ||
            f->dev != st.st_dev || f->ino != st.st_ino) {
        /* classified under the lock, published last: a thread never sees a half-made entry */
        pthread_mutex_lock(&mu);
        if (f->state == FD_UNKNOWN || f->dev != st.st_dev || f->ino != st.st_ino) {
            char link[64], path[PATH_MAX];
            int state = FD_IGNORED;
            __atomic_store_n(&f->state, FD_UNKNOWN, __ATOMIC_RELEASE);
            snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
            ssize_t n = readlink(link, path, sizeof path - 1);
            if (n > 0 && S_ISREG(st.st_mode)) {
                path[n] = 0;
                if ((size_t)n > watch_len && strncmp(path, watch_dir, watch_len) == 0 &&
                        path[watch_len] == '/' && key_of_fd(fd, f->key) == 0) {
                    int fl = fcntl(fd, F_GETFL);
                    f->dsync = fl >= 0 && (fl & O_DSYNC);
                    put_text(f->key, "path", path);
                    state = FD_WATCHED;
                }
            }
            f->dev = st.st_dev;
            f->ino = st.st_ino;
            __atomic_store_n(&f->state, state, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&mu);
    }
    return f->state == FD_WATCHED ? f : NULL;
}

static void forget(int fd) {
    if (fd >= 0 && fd < MAX_FDS)
        __atomic_store_n(&fds[fd].state, FD_UNKNOWN, __ATOMIC_RELEASE);
}

/* Image updates are undoable: a process frozen by the power cut in the middle of one leaves
 * KEY.undo (old image size u64, then records: offset u64, length u64, the old bytes) and the
 * restore rolls the image back to before that sync, which had not returned. */
struct update {
    int src, img, undo;
};

static int update_begin(struct update *u, const char *key, int src) {
    char p[PATH_MAX];
    struct stat ist;
    u->src = src;
    shadow_path(p, key, "img");
    u->img = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    shadow_path(p, key, "undo");
    u->undo = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
    if (u->img < 0 || u->undo < 0 || fstat(u->img, &ist) != 0)
        return -1;
    uint64_t size = (uint64_t)ist.st_size;
    write_all(u->undo, (const char *)&size, sizeof size);
    return 0;
}

static void update_end(struct update *u, off_t size) {
    if (u->img >= 0 && size >= 0 && ftruncate(u->img, size) != 0) { /* nothing better to do */ }
    if (u->undo >= 0 && ftruncate(u->undo, 0) != 0) { /* idem */ }
    if (u->img >= 0) real_close(u->img);
    if (u->undo >= 0) real_close(u->undo);
}

/* copy [off, off+len) of the file into the image, saving the image's old bytes first */
static void copy_range(struct update *u, off_t off, size_t len) {
    char buf[65536 + 16], old[65536 + 16];
    while (len > 0) {
        size_t want = len < 65536 ? len : 65536;
        ssize_t o = pread(u->img, old + 16, want, off);
        uint64_t *h = (uint64_t *)old;
        h[0] = (uint64_t)off;
        h[1] = o > 0 ? (uint64_t)o : 0;
        write_all(u->undo, old, 16 + (size_t)h[1]);
        ssize_t r = pread(u->src, buf, want, off);
        if (r <= 0)
            return;
        ssize_t w = real_pwrite(u->img, buf, (size_t)r, off);
        if (w != r)
            return;
        off += r;
        len -= (size_t)r;
    }
}

/* copy every data extent of the file (sparse files stay sparse) */
static void copy_whole(struct update *u, off_t size) {
    off_t pos = 0;
    while (pos < size) {
        off_t d = lseek(u->src, pos, SEEK_DATA);
        if (d < 0 || d >= size)
            break;
        off_t h = lseek(u->src, d, SEEK_HOLE);
        if (h < 0 || h > size)
            h = size;
        copy_range(u, d, (size_t)(h - d));
        pos = h;
    }
}

/* Make the image of `key` what the file `src_path` holds now, for the ranges written since the
 * last sync (the whole file if it is mapped for writing). */
static void sync_key(const char *key, const char *src_path, const char *call) {
    char p[PATH_MAX];
    struct stat st;
    struct update u = {-1, -1, -1};
    shadow_path(p, key, "log");
    int logfd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (logfd < 0)
        return;
    flock(logfd, LOCK_EX);
    int src = open(src_path, O_RDONLY | O_CLOEXEC);
    if (src >= 0 && fstat(src, &st) == 0 && update_begin(&u, key, src) == 0) {
        char mp[PATH_MAX];
        shadow_path(mp, key, "mapped");
        uint64_t cur = 0;
        shadow_path(p, key, "cur");
        int curfd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (curfd >= 0 && pread(curfd, &cur, sizeof cur, 0) != sizeof cur)
            cur = 0;
        off_t end = lseek(logfd, 0, SEEK_END);
        end -= end % 16;
        if (access(mp, F_OK) == 0) {
            copy_whole(&u, st.st_size);
        } else {
            uint64_t rec[2 * 256];
            for (off_t pos = (off_t)cur; pos < end;) {
                size_t want = (size_t)(end - pos) < sizeof rec ? (size_t)(end - pos) : sizeof rec;
                ssize_t r = pread(logfd, rec, want, pos);
                if (r <= 0)
                    break;
                r -= r % 16;
                for (ssize_t i = 0; i < r / 8; i += 2)
                    copy_range(&u, (off_t)rec[i], (size_t)rec[i + 1]);
                pos += r;
            }
        }
        cur = (uint64_t)end;
        if (curfd >= 0) {
            real_pwrite(curfd, &cur, sizeof cur, 0);
            real_close(curfd);
        }
        update_end(&u, st.st_size);
        event(call, key);
    } else {
        update_end(&u, -1);
    }
    if (src >= 0) real_close(src);
    flock(logfd, LOCK_UN);
    real_close(logfd);
}

static void sync_fd(int fd, struct fdinfo *f, const char *call) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    sync_key(f->key, link, call);
}

/* Writers and syncs of one file exclude each other (flock on KEY.log: shared around a write and
 * its log record, exclusive around a sync's copy), so an image is the file at one instant: never
 * a later write's page copied by a sync that missed that write's other pages. */
static int write_begin(struct fdinfo *f) {
    char p[PATH_MAX];
    shadow_path(p, f->key, "log");
    int logfd = open(p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (logfd >= 0)
        flock(logfd, LOCK_SH);
    return logfd;
}

/* a write of n bytes at off went through f: log it (and make it durable if O_DSYNC) */
static void write_end(int logfd, int fd, struct fdinfo *f, off_t off, ssize_t n) {
    if (logfd < 0)
        return;
    if (n > 0) {
        uint64_t rec[2] = {(uint64_t)off, (uint64_t)n};
        write_all(logfd, (const char *)rec, sizeof rec);
    }
    if (n <= 0 || !f->dsync || lie) {
        flock(logfd, LOCK_UN);
        real_close(logfd);
        return;
    }
    /* O_DSYNC: this range (only) is on disk; the log keeps it for the next full sync too */
    flock(logfd, LOCK_EX);
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    int src = open(link, O_RDONLY | O_CLOEXEC);
    struct update u = {-1, -1, -1};
    struct stat ist;
    if (src >= 0 && update_begin(&u, f->key, src) == 0 && fstat(u.img, &ist) == 0) {
        copy_range(&u, off, (size_t)n);
        update_end(&u, ist.st_size < off + n ? off + n : ist.st_size);
        event("dsync-write", f->key);
    } else {
        update_end(&u, -1);
    }
    if (src >= 0) real_close(src);
    flock(logfd, LOCK_UN);
    real_close(logfd);
}

static off_t pos_after(int fd, ssize_t n) { return lseek(fd, 0, SEEK_CUR) - (n > 0 ? n : 0); }

ssize_t write(int fd, const void *buf, size_t count) {
    RESOLVE(write);
    struct fdinfo *f = watched(fd);
    if (!f)
        return real_write(fd, buf, count);
    int logfd = write_begin(f);
    ssize_t n = real_write(fd, buf, count);
    int e = errno;
    write_end(logfd, fd, f, pos_after(fd, n), n);
    errno = e;
    return n;
}

ssize_t writev(int fd, const struct iovec *iov, int cnt) {
    RESOLVE(writev);
    struct fdinfo *f = watched(fd);
    if (!f)
        return real_writev(fd, iov, cnt);
    int logfd = write_begin(f);
    ssize_t n = real_writev(fd, iov, cnt);
    int e = errno;
    write_end(logfd, fd, f, pos_after(fd, n), n);
    errno = e;
    return n;
}

#define PWRITE_LIKE(name, args, call, off)                                  \
    ssize_t name args {                                                     \
        RESOLVE(name);                                                      \
        struct fdinfo *f = watched(fd);                                     \
        if (!f)                                                             \
            return call;                                                    \
        int logfd = write_begin(f);                                         \
        ssize_t n = call;                                                   \
        int e = errno;                                                      \
        write_end(logfd, fd, f, off, n);                                    \
        errno = e;                                                          \
        return n;                                                           \
    }

PWRITE_LIKE(pwrite, (int fd, const void *buf, size_t count, off_t off),
            real_pwrite(fd, buf, count, off), off)
PWRITE_LIKE(pwrite64, (int fd, const void *buf, size_t count, off_t off),
            real_pwrite64(fd, buf, count, off), off)
PWRITE_LIKE(pwritev, (int fd, const struct iovec *iov, int cnt, off_t off),
            real_pwritev(fd, iov, cnt, off), off)
PWRITE_LIKE(pwritev64, (int fd, const struct iovec *iov, int cnt, off_t off),
            real_pwritev64(fd, iov, cnt, off), off)
/* pwritev2 with offset -1 writes at the file position */
PWRITE_LIKE(pwritev2, (int fd, const struct iovec *iov, int cnt, off_t off, int flags),
            real_pwritev2(fd, iov, cnt, off, flags), off == -1 ? pos_after(fd, n) : off)

static int do_sync(int fd, int rc, const char *call) {
    struct fdinfo *f;
    if (rc == 0 && !lie && (f = watched(fd))) {
        sync_fd(fd, f, call);
    } else if (rc == 0 && lie && (f = watched(fd))) {
        event("lied", f->key);
    }
    return rc;
}

int fsync(int fd) {
    RESOLVE(fsync);
    if (lie && watched(fd))
        return do_sync(fd, 0, "fsync");
    return do_sync(fd, real_fsync(fd), "fsync");
}

int fdatasync(int fd) {
    RESOLVE(fdatasync);
    if (lie && watched(fd))
        return do_sync(fd, 0, "fdatasync");
    return do_sync(fd, real_fdatasync(fd), "fdatasync");
}

/* every watched file that has a log: a whole-file-system sync */
static void sync_all(const char *call) {
    DIR *d = opendir(shadow_dir);
    struct dirent *e;
    if (!d)
        return;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 5 || n >= KEY_LEN + 5 || strcmp(e->d_name + n - 5, ".path") != 0)
            continue;
        char key[KEY_LEN], p[PATH_MAX], path[PATH_MAX], now[KEY_LEN];
        memcpy(key, e->d_name, n - 5);
        key[n - 5] = 0;
        shadow_path(p, key, "path");
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t r = read(fd, path, sizeof path - 1);
        real_close(fd);
        if (r <= 0)
            continue;
        path[r] = 0;
        /* the path may name another file by now: sync only if it is still this one */
        if (powerloss_key(path, now, sizeof now) == 0 && strcmp(now, key) == 0)
            sync_key(key, path, call);
    }
    closedir(d);
}

int syncfs(int fd) {
    RESOLVE(syncfs);
    int rc = lie && watch_len ? 0 : real_syncfs(fd);
    if (rc == 0 && watch_len && !lie)
        sync_all("syncfs");
    return rc;
}

void sync(void) {
    RESOLVE(sync);
    if (!(lie && watch_len))
        real_sync();
    if (watch_len && !lie)
        sync_all("sync");
}

int close(int fd) {
    RESOLVE(close);
    forget(fd);
    return real_close(fd);
}

int dup2(int old, int new) {
    RESOLVE(dup2);
    int rc = real_dup2(old, new);
    if (rc >= 0)
        forget(new);
    return rc;
}

int dup3(int old, int new, int flags) {
    RESOLVE(dup3);
    int rc = real_dup3(old, new, flags);
    if (rc >= 0)
        forget(new);
    return rc;
}

static void *mapped(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    struct fdinfo *f;
    if (addr == MAP_FAILED || !(flags & MAP_SHARED) || !(prot & PROT_WRITE) || !(f = watched(fd)))
        return addr;
    struct mapping *m = calloc(1, sizeof *m);
    if (!m)
        return addr;
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, m->path, sizeof m->path - 1);
    m->path[n > 0 ? n : 0] = 0;
    m->addr = addr;
    m->len = len;
    m->off = off;
    strcpy(m->key, f->key);
    put_text(f->key, "mapped", "1");
    pthread_mutex_lock(&mu);
    m->next = maps;
    maps = m;
    pthread_mutex_unlock(&mu);
    return addr;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    RESOLVE(mmap);
    return mapped(real_mmap(addr, len, prot, flags, fd, off), len, prot, flags, fd, off);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    RESOLVE(mmap64);
    return mapped(real_mmap64(addr, len, prot, flags, fd, off), len, prot, flags, fd, off);
}

int munmap(void *addr, size_t len) {
    RESOLVE(munmap);
    pthread_mutex_lock(&mu);
    for (struct mapping **pm = &maps; *pm; pm = &(*pm)->next) {
        if ((*pm)->addr == addr) {
            struct mapping *m = *pm;
            *pm = m->next;
            free(m);
            break;
        }
    }
    pthread_mutex_unlock(&mu);
    return real_munmap(addr, len);
}

/* msync(MS_SYNC) of a watched mapping: the file's content is on disk (over-approximated by the
 * whole file, which covers the synced range) */
int msync(void *addr, size_t len, int flags) {
    RESOLVE(msync);
    int rc = lie && watch_len ? 0 : real_msync(addr, len, flags);
    if (rc != 0 || !(flags & MS_SYNC) || !watch_len)
        return rc;
    char key[KEY_LEN] = "", path[PATH_MAX] = "";
    pthread_mutex_lock(&mu);
    for (struct mapping *m = maps; m; m = m->next) {
        if ((char *)addr >= m->addr && (char *)addr < m->addr + m->len) {
            strcpy(key, m->key);
            strcpy(path, m->path);
            break;
        }
    }
    pthread_mutex_unlock(&mu);
    if (*key)
        lie ? event("lied", key) : sync_key(key, path, "msync");
    return rc;
}
