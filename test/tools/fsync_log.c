/*-------------------------------------------------------------------------
 *
 * fsync_log.c
 *		A shim preloaded (LD_PRELOAD) into a test server that logs every
 *		fsync, fdatasync and rename the server makes, with the paths, to the
 *		file FSYNC_LOG names, and every close of a descriptor that write()
 *		wrote through since its last fsync or fdatasync ("close-unflushed"):
 *		for test/t/017_tokens_state_durable.pl, which checks that the state
 *		file's content is flushed through the descriptor that wrote it
 *		before its rename, and the data directory after it.  The calls
 *		themselves go through.
 *
 * Not part of the build; the test compiles it into its own directory:
 *
 *	gcc -shared -fPIC test/tools/fsync_log.c -o fsync_log.so -ldl
 *
 * Each line: the process id, the call, its path or paths (absolute).
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		test/tools/fsync_log.c
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Descriptors below this are tracked for writes not yet flushed. */
#define TRACKED_FDS 65536

/* Whether write() went through a descriptor since its last flush. */
static unsigned char unflushed[TRACKED_FDS];

static ssize_t (*real_write) (int, const void *, size_t) = NULL;
static int	(*real_close) (int) = NULL;

/* Look up the calls this shim wraps and itself uses. */
static void
find_real_calls(void)
{
	if (real_write == NULL)
		real_write = dlsym(RTLD_NEXT, "write");
	if (real_close == NULL)
		real_close = dlsym(RTLD_NEXT, "close");
}

/* Remember that fd holds writes not yet flushed, or that it holds none. */
static void
mark_fd(int fd, unsigned char dirty)
{
	if (fd >= 0 && fd < TRACKED_FDS)
		unflushed[fd] = dirty;
}

/* Append one line to the log; keeps errno as the caller had it. */
static void
log_call(const char *call, const char *path, const char *path2)
{
	const char *log = getenv("FSYNC_LOG");
	char		line[3 * PATH_MAX];
	int			save_errno = errno;
	int			len;
	int			fd;

	if (log == NULL)
		return;
	len = snprintf(line, sizeof(line), "%d %s %s%s%s\n", (int) getpid(), call,
				   path, path2 ? " " : "", path2 ? path2 : "");
	find_real_calls();
	fd = open(log, O_WRONLY | O_APPEND | O_CREAT, 0644);
	if (fd >= 0)
	{
		if (real_write(fd, line, len) < 0)
			(void) 0;
		real_close(fd);
	}
	errno = save_errno;
}

/* The path a descriptor stands for. */
static void
fd_path(int fd, char *path)
{
	char		link[64];
	ssize_t		n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, path, PATH_MAX - 1);
	path[n < 0 ? 0 : n] = '\0';
}

/* A path made absolute against the working directory. */
static void
absolute(const char *name, char *path)
{
	char		cwd[PATH_MAX];

	if (name[0] == '/' || getcwd(cwd, sizeof(cwd)) == NULL)
		snprintf(path, PATH_MAX, "%s", name);
	else
		snprintf(path, PATH_MAX, "%s/%s", cwd, name);
}

int
fsync(int fd)
{
	static int	(*real) (int) = NULL;
	char		path[PATH_MAX];

	if (real == NULL)
		real = dlsym(RTLD_NEXT, "fsync");
	fd_path(fd, path);
	log_call("fsync", path, NULL);
	mark_fd(fd, 0);
	return real(fd);
}

int
fdatasync(int fd)
{
	static int	(*real) (int) = NULL;
	char		path[PATH_MAX];

	if (real == NULL)
		real = dlsym(RTLD_NEXT, "fdatasync");
	fd_path(fd, path);
	log_call("fdatasync", path, NULL);
	mark_fd(fd, 0);
	return real(fd);
}

int
rename(const char *from, const char *to)
{
	static int	(*real) (const char *, const char *) = NULL;
	char		path_from[PATH_MAX];
	char		path_to[PATH_MAX];
	int			result;

	if (real == NULL)
		real = dlsym(RTLD_NEXT, "rename");
	absolute(from, path_from);
	absolute(to, path_to);
	result = real(from, to);
	if (result == 0)
		log_call("rename", path_from, path_to);
	return result;
}

ssize_t
write(int fd, const void *buf, size_t count)
{
	find_real_calls();
	mark_fd(fd, 1);
	return real_write(fd, buf, count);
}

int
close(int fd)
{
	char		path[PATH_MAX];

	find_real_calls();
	if (fd >= 0 && fd < TRACKED_FDS && unflushed[fd])
	{
		fd_path(fd, path);
		log_call("close-unflushed", path, NULL);
		unflushed[fd] = 0;
	}
	return real_close(fd);
}
