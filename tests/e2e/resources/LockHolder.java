import java.io.RandomAccessFile;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;

/** Takes the log dir lock exactly as a Kafka broker does (FileChannel.tryLock on .lock) and
 *  holds it until its standard input closes. */
public class LockHolder {
    public static void main(String[] args) throws Exception {
        RandomAccessFile file = new RandomAccessFile(args[0] + "/.lock", "rw");
        FileChannel channel = file.getChannel();
        FileLock lock = channel.tryLock();
        System.out.println(lock == null ? "BUSY" : "LOCKED");
        System.out.flush();
        while (System.in.read() != -1) { }
        if (lock != null) lock.release();
        channel.close();
    }
}
