/* SPDX-License-Identifier: BSD-3-Clause */
/* The control thread's sockets: addresses, listeners, non-blocking connects, small frames. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ctl.h"

/* "host:port" or "[v6]:port" to a socket address (names resolved). */
int kvl_ctl_resolve(const char *addr, struct sockaddr_storage *ss, socklen_t *len, char *err,
		    size_t errlen)
{
	char host[KVL_CTRL_ADDR_LEN];
	const char *colon, *h = addr, *port;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai = NULL;
	size_t hl;
	int rc;

	if (addr[0] == '[') {
		const char *close = strchr(addr, ']');

		if (close == NULL || close[1] != ':')
			goto bad;
		h = addr + 1;
		hl = (size_t)(close - h);
		port = close + 2;
	} else {
		colon = strrchr(addr, ':');
		if (colon == NULL)
			goto bad;
		hl = (size_t)(colon - addr);
		port = colon + 1;
	}
	if (hl == 0 || hl >= sizeof(host))
		goto bad;
	memcpy(host, h, hl);
	host[hl] = '\0';
	rc = getaddrinfo(host, port, &hints, &ai);
	if (rc != 0 || ai == NULL) {
		snprintf(err, errlen, "%s: cannot resolve: %s", addr, gai_strerror(rc));
		return -EHOSTUNREACH;
	}
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	*len = ai->ai_addrlen;
	freeaddrinfo(ai);
	return 0;
bad:
	snprintf(err, errlen, "%s: expected host:port", addr);
	return -EINVAL;
}

void kvl_ctl_format_addr(const struct sockaddr_storage *ss, char *out, size_t len)
{
	char host[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;

	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const void *)ss;

		inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
		port = ntohs(a->sin_port);
		snprintf(out, len, "%s:%u", host, port);
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const void *)ss;

		inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
		port = ntohs(a->sin6_port);
		snprintf(out, len, "[%s]:%u", host, port);
	} else {
		snprintf(out, len, "?");
	}
}

int kvl_ctl_listen_on(const struct sockaddr_storage *ss, socklen_t len, char *bound,
		      size_t boundlen)
{
	struct sockaddr_storage got;
	socklen_t gl = sizeof(got);
	int one = 1, fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (const struct sockaddr *)ss, len) < 0 || listen(fd, 64) < 0 ||
	    getsockname(fd, (struct sockaddr *)&got, &gl) < 0) {
		int rc = -errno;

		close(fd);
		return rc;
	}
	kvl_ctl_format_addr(&got, bound, boundlen);
	return fd;
}

/* The IPv4 address of netdev @dev (the tcp transport binds its data path there). */
int kvl_ctl_netdev_ipv4(const char *dev, struct in_addr *out)
{
	struct ifaddrs *ifa, *i;
	int rc = -EADDRNOTAVAIL;

	if (getifaddrs(&ifa) < 0)
		return -errno;
	for (i = ifa; i; i = i->ifa_next) {
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
		    strcmp(i->ifa_name, dev) == 0) {
			*out = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
			rc = 0;
			break;
		}
	}
	freeifaddrs(ifa);
	return rc;
}

/* A blocking-free send of one small frame on a data connection being bound. */
int kvl_ctl_send_small(int fd, struct kvl_ctrl_msg *m)
{
	return kvl_ctl_send_small_tls(fd, NULL, m);
}

int kvl_ctl_send_small_tls(int fd, SSL *ssl, struct kvl_ctrl_msg *m)
{
	uint8_t buf[256];
	int n = kvl_ctrl_encode(m, buf, sizeof(buf));

	if (n < 0)
		return n;
	/* The socket buffer of a fresh connection always takes a few hundred bytes (one TLS
	 * record of them: 22 more). */
	return kvl_ctl_send(fd, ssl, buf, (size_t)n) == n ? 0 : -EIO;
}

int kvl_ctl_start_connect(const char *addr, int *fd_out, char *err, size_t errlen,
			  const struct in_addr *src)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int rc = kvl_ctl_resolve(addr, &ss, &len, err, errlen), fd, one = 1;

	if (rc < 0)
		return rc;
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (src && ss.ss_family == AF_INET) {
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr = *src };

		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			rc = -errno;
			snprintf(err, errlen, "%s: cannot bind to the NIC's address: %s", addr,
				 strerror(errno));
			close(fd);
			return rc;
		}
	}
	if (connect(fd, (struct sockaddr *)&ss, len) < 0 && errno != EINPROGRESS) {
		rc = -errno;
		snprintf(err, errlen, "%s: connect: %s", addr, strerror(errno));
		close(fd);
		return rc;
	}
	*fd_out = fd;
	return 0;
}
