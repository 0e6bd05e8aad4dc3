package sluice.interop;

import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.Driver;
import java.sql.DriverManager;
import java.sql.DriverPropertyInfo;
import java.sql.SQLException;
import java.sql.SQLFeatureNotSupportedException;
import java.sql.Statement;
import java.util.Properties;
import java.util.logging.Logger;

/**
 * Connector/J for Debezium's MySQL connector on MariaDB 10.11: Debezium reads 10.11 as newer
 * than MySQL 8.4 and asks SHOW BINARY LOG STATUS, which MariaDB 10.11 lacks. URLs
 * jdbc:sluiceshim://... are Connector/J's jdbc:mysql://... with that one statement rewritten to
 * SHOW MASTER STATUS (../shared/facts/debezium.md). Used only by `make interop`.
 */
public class MariaDbShim implements Driver {
    private static final String PREFIX = "jdbc:sluiceshim:";

    static {
        try {
            DriverManager.registerDriver(new MariaDbShim());
        } catch (SQLException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private final Driver inner;

    public MariaDbShim() throws SQLException {
        inner = new com.mysql.cj.jdbc.Driver();
    }

    static String rewrite(String sql) {
        if (sql != null && sql.trim().equalsIgnoreCase("SHOW BINARY LOG STATUS")) {
            return "SHOW MASTER STATUS";
        }
        return sql;
    }

    private static Object call(Object target, java.lang.reflect.Method method, Object[] args)
            throws Throwable {
        try {
            return method.invoke(target, args);
        } catch (InvocationTargetException e) {
            throw e.getCause();
        }
    }

    static Statement statement(Statement real) {
        InvocationHandler handler = (proxy, method, args) -> {
            if (args != null && args.length > 0 && args[0] instanceof String
                    && method.getName().startsWith("execute")) {
                args[0] = rewrite((String) args[0]);
            }
            return call(real, method, args);
        };
        return (Statement) Proxy.newProxyInstance(
                MariaDbShim.class.getClassLoader(), new Class<?>[] {Statement.class}, handler);
    }

    static Connection connection(Connection real) {
        InvocationHandler handler = (proxy, method, args) -> {
            String name = method.getName();
            if (name.equals("createStatement")) {
                return statement((Statement) call(real, method, args));
            }
            if ((name.equals("prepareStatement") || name.equals("prepareCall"))
                    && args != null && args[0] instanceof String) {
                args[0] = rewrite((String) args[0]);
            }
            return call(real, method, args);
        };
        return (Connection) Proxy.newProxyInstance(
                MariaDbShim.class.getClassLoader(), new Class<?>[] {Connection.class}, handler);
    }

    @Override
    public Connection connect(String url, Properties info) throws SQLException {
        if (!acceptsURL(url)) {
            return null;
        }
        Connection real = inner.connect("jdbc:mysql:" + url.substring(PREFIX.length()), info);
        return real == null ? null : connection(real);
    }

    @Override
    public boolean acceptsURL(String url) {
        return url != null && url.startsWith(PREFIX);
    }

    @Override
    public DriverPropertyInfo[] getPropertyInfo(String url, Properties info) throws SQLException {
        return inner.getPropertyInfo("jdbc:mysql:" + url.substring(PREFIX.length()), info);
    }

    @Override
    public int getMajorVersion() {
        return inner.getMajorVersion();
    }

    @Override
    public int getMinorVersion() {
        return inner.getMinorVersion();
    }

    @Override
    public boolean jdbcCompliant() {
        return false;
    }

    @Override
    public Logger getParentLogger() throws SQLFeatureNotSupportedException {
        return inner.getParentLogger();
    }
}
