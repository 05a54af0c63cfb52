// Copyright (c) 2026, the fencing developers

package org.fencing.tests;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * A TCP proxy in front of the server, on a port of the loopback address the
 * kernel picks, whose traffic can be stopped as a network that swallows
 * packets stops it: after stall() nothing it receives goes on, until
 * resume(). holding() is true once something it received since stall()
 * waits there.
 */
final class StallingProxy implements AutoCloseable {
    private final ServerSocket listener;
    private final String targetHost;
    private final int targetPort;
    private final List<Socket> sockets = new CopyOnWriteArrayList<>();
    private final Object gate = new Object();
    private boolean flowing = true; // guarded by gate
    private volatile boolean holding;

    StallingProxy() throws IOException {
        URI target = URI.create(Db.url().substring("jdbc:".length()));
        targetHost = target.getHost();
        targetPort = target.getPort();
        listener = new ServerSocket();
        listener.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
        Thread accept = new Thread(this::accept, "stalling proxy");
        accept.setDaemon(true);
        accept.start();
    }

    /** A data source whose connections go through the proxy. */
    PGSimpleDataSource source() {
        String url = Db.url().replaceFirst("//[^/]*/", "//127.0.0.1:" + listener.getLocalPort() + "/");
        return Db.source(url);
    }

    void stall() {
        synchronized (gate) {
            holding = false;
            flowing = false;
        }
    }

    void resume() {
        synchronized (gate) {
            flowing = true;
            gate.notifyAll();
        }
    }

    boolean holding() {
        return holding;
    }

    @Override
    public void close() throws IOException {
        resume();
        listener.close();
        for (Socket socket : sockets) {
            socket.close();
        }
    }

    private void accept() {
        while (true) {
            Socket client;
            Socket server;
            try {
                client = listener.accept();
                server = new Socket(targetHost, targetPort);
            } catch (IOException e) {
                return;
            }
            sockets.add(client);
            sockets.add(server);
            pump(client, server);
            pump(server, client);
        }
    }

    private void pump(Socket from, Socket to) {
        Thread thread = new Thread(() -> {
            byte[] buffer = new byte[65536];
            try (InputStream in = from.getInputStream(); OutputStream out = to.getOutputStream()) {
                int n;
                while ((n = in.read(buffer)) >= 0) {
                    synchronized (gate) {
                        if (!flowing) {
                            holding = true;
                        }
                        while (!flowing) {
                            gate.wait();
                        }
                    }
                    out.write(buffer, 0, n);
                    out.flush();
                }
            } catch (IOException | InterruptedException e) {
                // one side closed
            } finally {
                try {
                    from.close();
                    to.close();
                } catch (IOException ignored) {
                    // closed already
                }
            }
        }, "stalling proxy pump");
        thread.setDaemon(true);
        thread.start();
    }
}
