import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.sql.*;

// Asks every question read from stdin ("id<TAB>question" per line) through
// nlproxy with a server-prepared PreparedStatement (prepareThreshold=1 in
// the URL), executing each one three times. Mode "autocommit" runs idle;
// "tx" runs each question inside its own transaction and then proves the
// transaction is writable again. Prints "id#k OK rows" or "id#k ERR sqlstate".
// Args: jdbc-url user password mode
public class SafetyClient {
    public static void main(String[] args) throws Exception {
        boolean tx = args[3].equals("tx");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try (Connection c = DriverManager.getConnection(args[0], args[1], args[2])) {
            c.setAutoCommit(!tx);
            String line;
            while ((line = in.readLine()) != null) {
                String[] parts = line.split("\t", 2);
                String id = parts[0];
                boolean ok = true;
                try (PreparedStatement ps = c.prepareStatement("-- ask: " + parts[1])) {
                    for (int k = 1; k <= 3 && ok; k++) {
                        try (ResultSet rs = ps.executeQuery()) {
                            int n = 0;
                            while (rs.next()) n++;
                            System.out.println(id + "#" + k + " OK " + n);
                        } catch (SQLException e) {
                            System.out.println(id + "#" + k + " ERR " + e.getSQLState());
                            ok = false;
                        }
                    }
                }
                if (tx) {
                    if (ok) {
                        try (Statement s = c.createStatement()) {
                            s.executeUpdate("INSERT INTO scratch VALUES (1)");
                            System.out.println(id + "-write OK");
                        } catch (SQLException e) {
                            System.out.println(id + "-write ERR " + e.getSQLState());
                        }
                    }
                    c.rollback();
                }
            }
            c.setAutoCommit(true);
            try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("SELECT 42")) {
                rs.next();
                System.out.println("after " + rs.getString(1));
            }
        }
    }
}
