// Client runs the shared client scenario with pgjdbc and prints one line per
// step; the Go test compares the lines. Settings come from PG* environment
// variables; extra URL parameters (e.g. prepareThreshold=1&binaryTransfer=true)
// come from the first argument.
import java.math.BigDecimal;
import java.sql.*;
import java.util.HexFormat;
import java.util.Properties;

public class Client {
    static final String TYPES_SQL = "SELECT 42::int4, 'héllo wörld ✓ 日本語'::text, 12345.6789::numeric, "
            + "'2024-01-02 03:04:05.123+00'::timestamptz, '\\xdeadbeef'::bytea, NULL::text";
    static final String MARKER_SQL = "/* ask: how many rows are in tx_t */ SELECT 1";

    static String fmt(ResultSet rs, int i) throws SQLException {
        Object v = rs.getObject(i);
        if (v == null) return "null";
        if (v instanceof byte[] b) return HexFormat.of().formatHex(b);
        if (v instanceof Timestamp ts) return Long.toString(ts.getTime());
        if (v instanceof BigDecimal d) return d.toPlainString();
        return v.toString();
    }

    static String row(ResultSet rs) throws SQLException {
        if (!rs.next()) return "<no row>";
        StringBuilder sb = new StringBuilder();
        int n = rs.getMetaData().getColumnCount();
        for (int i = 1; i <= n; i++) {
            if (i > 1) sb.append('|');
            sb.append(fmt(rs, i));
        }
        return sb.toString();
    }

    static String query(Connection c, String sql) throws SQLException {
        // PreparedStatement so prepareThreshold applies to every step.
        try (PreparedStatement ps = c.prepareStatement(sql); ResultSet rs = ps.executeQuery()) {
            return row(rs);
        }
    }

    public static void main(String[] args) throws Exception {
        String env = System.getenv("PGSSLMODE");
        String url = "jdbc:postgresql://" + System.getenv("PGHOST") + ":" + System.getenv("PGPORT") + "/" + System.getenv("PGDATABASE");
        Properties p = new Properties();
        p.setProperty("user", System.getenv("PGUSER"));
        p.setProperty("password", System.getenv("PGPASSWORD"));
        if (env != null && !env.equals("disable")) {
            p.setProperty("sslmode", "verify-full");
            p.setProperty("sslrootcert", System.getenv("PGSSLROOTCERT"));
        } else {
            p.setProperty("sslmode", "disable");
        }
        if (args.length > 0 && !args[0].isEmpty()) {
            for (String kv : args[0].split("&")) {
                String[] parts = kv.split("=", 2);
                p.setProperty(parts[0], parts[1]);
            }
        }
        try (Connection c = DriverManager.getConnection(url, p)) {
            System.out.println("connect: ok");
            System.out.println("simple: " + query(c, "SELECT 1"));
            try (PreparedStatement ps = c.prepareStatement("SELECT ?::int + 1, ?::text")) {
                // Run it several times so prepareThreshold kicks in for named statements.
                String last = "";
                for (int i = 0; i < 3; i++) {
                    ps.setInt(1, 41);
                    ps.setString(2, "héllo ✓ 日本");
                    try (ResultSet rs = ps.executeQuery()) { last = row(rs); }
                }
                System.out.println("param: " + last);
            }
            String types = "";
            for (int i = 0; i < 3; i++) types = query(c, TYPES_SQL);
            System.out.println("types: " + types);
            try {
                query(c, "SELECT 1/0");
                System.out.println("error: none");
            } catch (SQLException e) {
                System.out.println("error: " + e.getSQLState());
            }
            System.out.println("recovered: " + query(c, "SELECT 2"));
            try (Statement st = c.createStatement()) {
                st.execute("CREATE TEMP TABLE tx_t(x int)");
                c.setAutoCommit(false);
                st.executeUpdate("INSERT INTO tx_t VALUES (1)");
                c.rollback();
                c.setAutoCommit(true);
            }
            System.out.println("rollback: " + query(c, "SELECT count(*) FROM tx_t"));
            try {
                query(c, MARKER_SQL);
                System.out.println("marker: none");
            } catch (SQLException e) {
                System.out.println("marker: " + e.getSQLState());
            }
            System.out.println("after-marker: " + query(c, "SELECT 3"));
        }
    }
}
